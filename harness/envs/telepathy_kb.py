"""Knowledge base of the ``telepathy`` gym: entities and the yes/no/maybe attributes that describe them.

Two hand-written tables, parsed once at import:

* ``ATTRIBUTES``: one line per attribute, ``name | question | yes statement | no statement |
  patterns``. ``question`` is the canonical way to ask about it (scripted agents use it);
  the statements are how the user answers; ``patterns`` are ``;``-separated regular expressions
  (matched on word boundaries, case-insensitive) that recognise a question about the attribute.
* ``ENTITIES``: one line per entity, ``name[, alias...] : category : tags``. A tag ``x`` means
  attribute ``x`` is yes, ``~x`` maybe; every attribute not tagged is no. Each category adds its
  implied tags (``CATEGORY_TAGS``), which an entity may override with ``-x`` (no) or ``~x``.

Every entity therefore has a value for every attribute (about 100). Entity names never collide with
attribute patterns that matter, and ``tests/test_gyms_telepathy.py`` checks that every entity has a
distinct attribute profile, so a questioner can always narrow the set down to one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

YES, NO, MAYBE = "yes", "no", "maybe"

ATTRIBUTES = r"""
animal | Is it an animal? | It is an animal. | It is not an animal. | animals?; creatures?; beasts?
mammal | Is it a mammal? | It is a mammal. | It is not a mammal. | mammals?
bird | Is it a bird? | It is a bird. | It is not a bird. | birds?
fish | Is it a fish? | It is a fish. | It is not a fish. | fish; fishes
insect | Is it an insect? | It is an insect. | It is not an insect. | insects?; bugs?
reptile | Is it a reptile? | It is a reptile. | It is not a reptile. | reptiles?
amphibian | Is it an amphibian? | It is an amphibian. | It is not an amphibian. | amphibians?
plant | Is it a plant? | It is a plant. | It is not a plant. | plants?; vegetation
tree | Is it a tree? | It is a tree. | It is not a tree. | trees?
flower | Is it a flower? | It is a flower. | It is not a flower. | flowers?; flowering; blooms?
food | Is it food, something you eat? | It is food you can eat. | It is not food. | foods?; edible; eatable; eat (it|this|that); be eaten; to eat; something you eat
fruit | Is it a fruit? | It is a fruit. | It is not a fruit. | fruits?
vegetable | Is it a vegetable? | It is a vegetable. | It is not a vegetable. | vegetables?; veggies?
drink | Is it a drink or a liquid? | It is a drink or a liquid. | It is not a drink or a liquid. | drinks?; drinkable; beverages?; liquids?
alcohol | Does it contain alcohol? | It contains alcohol. | It does not contain alcohol. | alcohol; alcoholic
place | Is it a place? | It is a place. | It is not a place. | places?; locations?; somewhere; destinations?
city | Is it a city? | It is a city. | It is not a city. | city; cities; towns?
country | Is it a country? | It is a country. | It is not a country. | country; countries; nations?
landmark | Is it a natural wonder or a famous landmark? | It is a natural wonder or a famous landmark. | It is not a natural wonder or a famous landmark. | landmarks?; natural wonders?; monuments?; sights?
building | Is it a building? | It is a building. | It is not a building. | buildings?
person | Is it a person, a kind of job? | It is a person (a profession). | It is not a person. | persons?; people; humans?; someone; jobs?; professions?; occupations?; workers?
vehicle | Is it a vehicle? | It is a vehicle. | It is not a vehicle. | vehicles?; transport; transportation; means of transport
instrument | Is it a musical instrument? | It is a musical instrument. | It is not a musical instrument. | instruments?; musical instruments?
music | Does it have to do with music? | It has to do with music. | It has nothing to do with music. | music; musical; songs?; sings?; singing
object | Is it an object, a thing you can use? | It is a man-made object. | It is not an object you use. | objects?; items?; things? you (can )?use
man_made | Is it man-made? | It is man-made. | It is not man-made. | man[- ]?made; manufactured; artificial; made by (people|humans)
tool | Is it a tool? | It is a tool. | It is not a tool. | tools?
furniture | Is it furniture? | It is furniture. | It is not furniture. | furniture
clothing | Is it something you wear? | It is worn (clothing or an accessory). | It is not worn. | clothes; clothing; wear; wearable; worn
toy | Is it a toy? | It is a toy. | It is not a toy. | toys?; play with
sport | Does it have to do with sport? | It has to do with sport. | It has nothing to do with sport. | sports?; sporty; athletic; athletes?
alive | Is it alive? | It is alive. | It is not alive. | alive; living; life
big | Is it bigger than a person? | It is bigger than a person. | It is not bigger than a person. | (bigger|larger|taller) than( a| an)? \w+; big; bigger; large; larger; huge; giant; tall
small | Does it fit in your hand? | It fits in your hand. | It does not fit in your hand. | small; smaller; tiny; little; fits? in (your |a |the |one )?(hand|pocket)
heavy | Is it heavy? | It is heavy. | It is not heavy. | heavy; heavier; weighs? a lot
soft | Is it soft? | It is soft. | It is not soft. | soft; fluffy
round | Is it round? | It is round. | It is not round. | round; circular; spherical
sharp | Is it sharp or spiky? | It is sharp or spiky. | It is neither sharp nor spiky. | sharp; spiky; spikes?; thorns?; thorny; blades?; cut
fly | Can it fly? | It can fly. | It cannot fly. | fly; flies; flying; flight; in the air
water | Is it found in or near water? | It lives in, travels on or is found next to water. | It is not found in water. | water; swims?; swimming; sea; seas; ocean; oceans; rivers?; lakes?; coast; coastal; aquatic; marine
legs | Does it have legs? | It has legs. | It has no legs. | legs?
four_legs | Does it have four legs? | It has four legs. | It does not have four legs. | four legs; 4 legs; four-legged
fur | Does it have fur or hair? | It has fur or hair. | It has no fur or hair. | fur; furry; hair; hairy
feathers | Does it have feathers? | It has feathers. | It has no feathers. | feathers?; feathered
eggs | Does it lay eggs? | It lays eggs. | It does not lay eggs. | eggs?; lays? eggs
tail | Does it have a tail? | It has a tail. | It has no tail. | tails?
shell | Does it have a shell? | It has a shell. | It has no shell. | shells?
horns | Does it have horns or antlers? | It has horns or antlers. | It has no horns or antlers. | horns?; antlers?
stripes | Does it have stripes? | It has stripes. | It has no stripes. | stripes?; striped; stripy
spots | Does it have spots? | It has spots. | It has no spots. | spots?; spotted; spotty; dots?
red | Is it red? | It is red. | It is not red. | red; reddish
green | Is it green? | It is green. | It is not green. | green; greenish
yellow | Is it yellow? | It is yellow. | It is not yellow. | yellow; yellowish; golden
white | Is it white? | It is white. | It is not white. | white; whitish
black | Is it black? | It is black. | It is not black. | black; blackish
brown | Is it brown? | It is brown. | It is not brown. | brown; brownish
blue | Is it blue? | It is blue. | It is not blue. | blue; bluish
gray | Is it gray? | It is gray. | It is not gray. | gray; grey; greyish; grayish; silver
pink | Is it pink? | It is pink. | It is not pink. | pink; pinkish
purple | Is it purple? | It is purple. | It is not purple. | purple; violet colou?red
pet | Is it kept as a pet? | It is kept as a pet. | It is not kept as a pet. | pets?; domestic; domesticated; tame
farm | Does it have to do with farms? | It has to do with farms. | It has nothing to do with farms. | farms?; farming; farmyard; livestock
wild | Does it live in the wild? | It lives in the wild. | It does not live in the wild. | wild; wildlife
dangerous | Can it be dangerous? | It can be dangerous. | It is not dangerous. | dangerous; danger; harmful; deadly; kill; bites?; venomous; poisonous
carnivore | Does it eat meat? | It eats meat. | It does not eat meat. | eats? meat; carnivores?; carnivorous; predators?; hunts?; hunting
night | Is it active at night? | It is active at night. | It is not active at night. | night; nights; nocturnal; at dark
loud | Is it loud? | It is loud. | It is not loud. | loud; noisy; noise; noises
africa | Is it in or from Africa? | It is in or from Africa. | It is not from Africa. | africa; african
asia | Is it in or from Asia? | It is in or from Asia. | It is not from Asia. | asia; asian
europe | Is it in or from Europe? | It is in or from Europe. | It is not from Europe. | europe; european
americas | Is it in or from the Americas? | It is in or from the Americas. | It is not from the Americas. | americas?; american; north america; south america
australia | Is it in or from Australia? | It is in or from Australia. | It is not from Australia. | australia; australian; oceania
cold | Is it cold, or found in cold places? | It is cold or found in cold places. | It is not cold. | cold places?; cold; snow; snowy; ice; icy; arctic; polar; freezing; frozen; winter
hot | Is it hot, or found in hot places? | It is hot (served hot, gets hot, or a hot place). | It is not hot. | hot places?; hot; warm; heat; heated; tropical; deserts?
indoor | Is it found indoors? | It is found indoors. | It is not usually found indoors. | indoors?; inside; in (a|the) house; at home; in (a|the) home
outdoor | Is it found outdoors? | It is found outdoors. | It is not usually found outdoors. | outdoors?; outside; open air
kitchen | Is it found in a kitchen? | It is found in a kitchen. | It is not found in a kitchen. | kitchens?; cook; cooks; cooking; cooked
office | Is it used in an office or for study? | It is used in an office or for study. | It is not used in an office or for study. | offices?; desks?; study; studying; write; writing; stationery
sweet | Is it sweet? | It is sweet. | It is not sweet. | sweet; sugary; sugar; desserts?
spicy | Is it spicy? | It is spicy. | It is not spicy. | spicy; spiced
baked | Is it baked? | It is baked. | It is not baked. | baked; bake; baking; bakery
dairy | Is it a dairy product? | It is a dairy product or contains dairy. | It contains no dairy. | dairy; lactose
meat | Does it contain meat? | It contains meat. | It contains no meat. | meat; meaty; contains? meat; beef; pork
grain | Is it made from grain or flour? | It is made from grain or flour. | It is not made from grain or flour. | grains?; flour; wheat; cereals?
breakfast | Is it eaten or drunk at breakfast? | It is had at breakfast. | It is not a breakfast item. | breakfast
raw | Is it eaten raw? | It is eaten raw. | It is not eaten raw. | raw; uncooked
tree_grown | Does it grow on a tree? | It grows on a tree. | It does not grow on a tree. | grows? on (a |the )?trees?; from (a |the )?trees?
electric | Does it use electricity? | It uses electricity. | It does not use electricity. | electric; electrical; electricity; electronic; plugs?; powered
metal | Is it made of metal? | It is made of metal. | It is not made of metal. | metal; metallic; steel; aluminium; aluminum
wood | Is it made of wood? | It is made of wood. | It is not made of wood. | wood; wooden; timber
glass | Is it made of glass? | It is made of glass. | It is not made of glass. | glass
plastic | Is it made of plastic? | It is made of plastic. | It is not made of plastic. | plastic
fabric | Is it made of fabric? | It is made of fabric. | It is not made of fabric. | fabric; cloth; cotton; wool; textiles?
paper | Is it made of paper? | It is made of paper. | It is not made of paper. | paper
wheels | Does it have wheels? | It has wheels. | It has no wheels. | wheels?; wheeled
screen | Does it have a screen? | It has a screen. | It has no screen. | screens?; display
engine | Does it have an engine? | It has an engine. | It has no engine. | engines?; motors?; motorized; motorised; fuel; petrol
passengers | Can it carry people? | It can carry people. | It cannot carry people. | passengers?; carry people; carries people; ride (it|on it); riding
rails | Does it run on rails? | It runs on rails. | It does not run on rails. | rails?; tracks?; railways?
public | Is it public transport? | It is public transport. | It is not public transport. | public transport; public
strings | Does it have strings? | It has strings. | It has no strings. | strings?; stringed
wind | Do you blow into it? | You blow into it. | You do not blow into it. | blow; blown; wind
percussion | Is it hit to make sound? | It is hit to make sound. | It is not hit to make sound. | percussion; hit; strike; struck; beat
keys | Does it have keys? | It has keys. | It has no keys. | keys
capital | Is it a capital city? | It is a capital city. | It is not a capital city. | capital city; capital cities; capital
island | Is it an island? | It is an island or on one. | It is not an island. | islands?
mountain | Is it mountainous or in mountains? | It is in or has mountains. | It has no mountains. | mountains?; mountainous; hills?; peaks?
old | Is it ancient or historic? | It is ancient or historic. | It is not ancient or historic. | old; ancient; historic; historical; history; centuries
uniform | Does it wear a uniform? | It wears a uniform. | It does not wear a uniform. | wears? (a )?uniforms?; uniforms?
medical | Does it have to do with health or medicine? | It has to do with health or medicine. | It has nothing to do with health or medicine. | medical; medicine; health; sick; patients?; illness
creative | Is it creative or artistic work? | It does creative, artistic work. | It is not creative work. | creative; arts?; artistic; artists?
university | Does it need a university degree? | It needs a university degree. | It does not need a university degree. | university; degree; college
drives | Does it drive a vehicle for work? | It drives a vehicle for work. | It does not drive a vehicle for work. | drives? (a )?vehicles?( for work)?; drives?; driving; drivers?
forest | Is it found in forests? | It is found in forests. | It is not found in forests. | forests?; jungles?; woods; woodland
children | Is it especially for children? | It is especially for children. | It is not especially for children. | children; kids?; child
"""

# Tags every entity of a category gets unless it overrides them.
CATEGORY_TAGS = {
    "animal": "animal alive wild outdoor",
    "plant": "plant alive outdoor wild",
    "food": "food kitchen",
    "object": "object man_made",
    "place": "place big outdoor",
    "person": "person alive legs indoor",
    "vehicle": "vehicle object man_made passengers outdoor",
    "instrument": "instrument music object man_made",
}

ENTITIES = r"""
dog, dogs : animal : mammal legs four_legs fur tail pet -wild ~indoor carnivore ~dangerous loud brown ~black ~white
cat, cats : animal : mammal legs four_legs fur tail pet -wild indoor carnivore night ~black ~white ~brown
horse : animal : mammal legs four_legs fur tail farm -wild big heavy brown ~black ~white passengers sport
cow : animal : mammal legs four_legs fur tail farm -wild big heavy ~food black white spots ~horns loud
pig : animal : mammal legs four_legs ~fur tail farm -wild ~food pink heavy
sheep : animal : mammal legs four_legs fur tail farm -wild white ~food ~horns soft
goat : animal : mammal legs four_legs fur tail farm ~wild horns ~food white ~brown mountain
rabbit, bunny : animal : mammal legs four_legs fur tail ~pet ~wild white ~brown ~food soft
mouse, mice : animal : mammal legs four_legs fur tail small night ~pet ~indoor brown ~gray
lion : animal : mammal legs four_legs fur tail dangerous carnivore big heavy africa loud yellow brown hot
tiger : animal : mammal legs four_legs fur tail dangerous carnivore big heavy asia stripes black forest
elephant : animal : mammal legs four_legs tail big heavy africa asia loud gray
giraffe : animal : mammal legs four_legs fur tail big heavy africa spots yellow brown
zebra : animal : mammal legs four_legs fur tail big africa stripes black white
bear : animal : mammal legs four_legs fur dangerous carnivore big heavy brown forest europe asia americas
polar bear : animal : mammal legs four_legs fur dangerous carnivore big heavy cold white water
wolf, wolves : animal : mammal legs four_legs fur tail dangerous carnivore night loud gray forest europe asia americas ~cold
fox, foxes : animal : mammal legs four_legs fur tail carnivore night red forest europe asia americas
deer : animal : mammal legs four_legs fur tail horns brown forest europe americas ~food
kangaroo : animal : mammal legs fur tail ~big brown australia hot
koala : animal : mammal legs fur gray australia forest soft
monkey : animal : mammal legs fur tail africa asia americas brown loud forest hot
gorilla : animal : mammal legs fur big heavy africa black forest ~dangerous
camel : animal : mammal legs four_legs fur tail big heavy hot africa asia brown passengers ~farm
hippopotamus, hippo : animal : mammal legs four_legs tail big heavy dangerous africa water gray hot
rhinoceros, rhino : animal : mammal legs four_legs tail big heavy dangerous africa horns gray hot
whale : animal : mammal water big heavy blue gray tail ~loud
dolphin : animal : mammal water tail gray carnivore
bat : animal : mammal legs fly night fur black ~small
squirrel : animal : mammal legs four_legs fur tail ~small brown red forest europe americas
hedgehog : animal : mammal legs four_legs small night brown sharp ~pet europe
beaver : animal : mammal legs four_legs fur tail water brown forest americas europe
otter : animal : mammal legs four_legs fur tail water carnivore brown
seal : animal : mammal fur water carnivore cold gray ~loud tail
panda : animal : mammal legs four_legs fur big heavy asia black white forest
raccoon : animal : mammal legs four_legs fur tail night americas gray black ~stripes
sloth : animal : mammal legs fur americas brown forest hot
cheetah : animal : mammal legs four_legs fur tail dangerous carnivore africa spots yellow hot
hamster : animal : mammal legs four_legs fur pet -wild indoor -outdoor small night brown white soft
platypus : animal : mammal legs four_legs fur tail water eggs australia brown
eagle : animal : bird feathers eggs legs fly carnivore ~dangerous brown white mountain
owl : animal : bird feathers eggs legs fly carnivore night brown ~white forest
penguin : animal : bird feathers eggs legs water cold black white carnivore
chicken, hen : animal : bird feathers eggs legs farm -wild ~fly ~food white brown ~loud
duck : animal : bird feathers eggs legs fly water ~farm ~food brown green
parrot : animal : bird feathers eggs legs fly ~pet green red blue yellow loud forest hot
ostrich : animal : bird feathers eggs legs big africa black white ~dangerous hot
flamingo : animal : bird feathers eggs legs fly water pink hot
swan : animal : bird feathers eggs legs fly water white
pigeon, dove : animal : bird feathers eggs legs fly gray ~white
crow, raven : animal : bird feathers eggs legs fly black loud
peacock : animal : bird feathers eggs legs ~fly tail blue green loud asia
hummingbird : animal : bird feathers eggs legs fly small green americas
shark : animal : fish water dangerous carnivore big heavy gray tail
salmon : animal : fish water eggs ~food pink gray
goldfish : animal : fish water pet -wild indoor -outdoor small eggs tail yellow
tuna : animal : fish water eggs ~food blue gray big
clownfish : animal : fish water small eggs stripes white hot
octopus : animal : water ~legs night carnivore eggs soft ~food red
jellyfish : animal : water ~dangerous soft ~small white
crab : animal : water legs shell eggs carnivore ~food red ~sharp
lobster : animal : water legs shell eggs ~food red tail blue
bee : animal : insect legs fly eggs small ~dangerous yellow black stripes ~farm
butterfly : animal : insect legs fly eggs small yellow ~blue
ant : animal : insect legs eggs small black ~red
mosquito : animal : insect legs fly eggs small night ~dangerous
ladybug, ladybird : animal : insect legs fly eggs small red black spots
spider : animal : legs eggs small ~dangerous carnivore black ~night
snake : animal : reptile eggs tail ~dangerous carnivore green
crocodile, alligator : animal : reptile eggs legs four_legs tail dangerous carnivore water big heavy green africa hot
turtle, tortoise : animal : reptile eggs legs four_legs tail shell ~water ~pet green brown
lizard : animal : reptile eggs legs four_legs tail ~small green hot
chameleon : animal : reptile eggs legs four_legs tail small green africa forest
frog : animal : amphibian eggs legs four_legs water small green loud night
snail : animal : shell small soft eggs ~food brown
worm, earthworm : animal : small soft pink brown
oak, oak tree : plant : tree big heavy wood brown green europe americas forest
pine, pine tree : plant : tree big heavy wood green cold ~sharp forest mountain
palm tree : plant : tree big wood green hot water
rose : plant : flower red ~white sharp ~pink
sunflower : plant : flower yellow ~big ~food
cactus, cacti : plant : sharp hot green ~flower americas
tulip : plant : flower red yellow europe
grass : plant : green soft ~farm ~small
bamboo : plant : green asia big wood ~food forest
lavender : plant : flower purple ~small europe
apple : food : fruit sweet raw tree_grown red green round
banana : food : fruit sweet raw tree_grown yellow breakfast
orange : food : fruit sweet raw tree_grown round
lemon : food : fruit raw tree_grown yellow
strawberry : food : fruit sweet raw red small
grape : food : fruit sweet raw small green purple round
watermelon : food : fruit sweet raw round green red heavy
pineapple : food : fruit sweet raw yellow ~sharp
cherry : food : fruit sweet raw tree_grown red small round
coconut : food : fruit tree_grown brown white round ~drink heavy
mango : food : fruit sweet raw tree_grown yellow ~green
avocado : food : fruit green tree_grown raw
tomato : food : ~fruit vegetable red round raw
carrot : food : vegetable ~raw ~sweet ~hot
potato : food : vegetable hot brown ~baked
onion : food : vegetable white ~raw ~purple round
broccoli : food : vegetable green ~raw ~hot
corn, sweetcorn : food : vegetable yellow ~hot ~sweet ~grain
pumpkin : food : vegetable ~fruit round heavy ~baked ~sweet
garlic : food : vegetable white small ~spicy
chili pepper, chili, chilli : food : vegetable spicy red green small
lettuce : food : vegetable green raw ~round ~soft
mushroom : food : ~vegetable white brown small ~dangerous ~hot ~forest ~raw
bread : food : baked grain breakfast brown ~hot
cheese : food : dairy yellow ~white ~breakfast
butter : food : dairy yellow breakfast soft
milk : food : dairy drink white breakfast
yogurt, yoghurt : food : dairy white breakfast soft ~sweet
ice cream : food : dairy sweet cold soft
chocolate : food : sweet brown ~dairy ~black
cake : food : baked sweet grain ~dairy soft
cookie, biscuit : food : baked sweet grain small round brown
pizza : food : baked hot grain dairy round ~meat
pasta, spaghetti : food : grain hot ~dairy ~meat
rice : food : grain white hot ~small asia
sushi : food : raw ~meat white asia
hamburger, burger : food : meat hot grain brown round
hot dog : food : meat hot grain ~red
sandwich : food : grain ~meat ~dairy ~hot ~breakfast
soup : food : hot ~drink ~meat ~vegetable
salad : food : green raw ~vegetable ~meat ~cold
steak : food : meat hot red brown heavy
bacon : food : meat hot breakfast red
sausage : food : meat hot ~breakfast brown
french fries, fries, chips : food : hot ~vegetable yellow small
popcorn : food : ~sweet ~hot white small ~grain
honey : food : sweet yellow ~drink ~breakfast
coffee : food : drink hot brown black breakfast
tea : food : drink hot ~green ~brown ~breakfast asia europe
orange juice : food : drink sweet breakfast ~cold
wine : food : drink alcohol red ~white europe
beer : food : drink alcohol yellow ~cold grain
pancake : food : ~baked sweet breakfast hot round grain
donut, doughnut : food : sweet grain round ~baked ~pink
taco : food : meat hot grain ~spicy americas
curry : food : hot spicy ~meat yellow asia ~vegetable
chair : object : furniture wood ~metal ~plastic indoor ~legs ~four_legs
table : object : furniture wood indoor ~legs ~four_legs heavy ~kitchen
bed : object : furniture ~big soft indoor heavy ~wood fabric
sofa, couch : object : furniture ~big soft indoor heavy fabric
lamp : object : electric indoor ~metal ~glass ~hot
refrigerator, fridge : object : electric kitchen big heavy cold white metal indoor
oven : object : electric kitchen hot heavy metal indoor baked
microwave : object : electric kitchen hot metal indoor ~screen
toaster : object : electric kitchen hot metal breakfast
kettle : object : electric kitchen hot metal ~plastic
knife, knives : object : kitchen sharp metal ~small tool ~dangerous
fork : object : kitchen metal ~sharp small
spoon : object : kitchen metal small ~wood
plate : object : kitchen round ~glass white
cup, mug : object : kitchen small ~glass ~plastic ~hot ~drink
bottle : object : glass ~plastic ~kitchen ~drink
television, tv : object : electric screen indoor ~loud plastic black
smartphone, phone, mobile phone : object : electric screen small plastic glass ~loud
laptop, computer : object : electric screen office keys plastic metal
keyboard : object : electric keys office plastic
camera : object : electric ~small ~screen plastic metal glass
clock : object : ~electric round indoor ~metal ~plastic ~loud
umbrella : object : fabric metal outdoor ~sharp
scissors : object : sharp metal office small tool ~dangerous
hammer : object : tool metal wood heavy
screwdriver : object : tool metal small ~sharp ~plastic
saw : object : tool metal sharp wood dangerous
ladder : object : tool ~metal ~wood ~big ~outdoor
shovel, spade : object : tool metal wood outdoor
pencil : object : office wood small yellow
pen : object : office plastic small ~metal ~blue
book : object : paper ~office indoor ~children
newspaper : object : paper black white ~office ~indoor
backpack, rucksack : object : fabric ~clothing ~office ~children ~outdoor
shoe, shoes : object : clothing ~fabric ~brown ~black
hat : object : clothing fabric ~soft ~outdoor ~round
sock, socks : object : clothing fabric soft small
glasses, eyeglasses, spectacles : object : ~clothing glass small ~metal ~plastic
wristwatch : object : clothing small metal round ~electric ~screen glass
candle : object : hot indoor ~small white
mirror : object : glass indoor ~round ~metal ~wood
coin : object : metal small round ~yellow ~gray
balloon : object : round soft ~red children toy
soccer ball, football : object : sport round white black outdoor toy
tennis racket : object : sport outdoor ~strings ~metal ~plastic
kite : object : fly outdoor ~fabric ~paper toy children
doll : object : toy children ~small ~soft plastic ~fabric
teddy bear : object : toy children soft fabric brown
toothbrush : object : plastic small indoor ~electric
towel : object : fabric soft indoor ~white ~water
pillow : object : fabric soft indoor white
broom : object : ~wood tool indoor ~plastic ~outdoor
bucket : object : plastic ~metal ~outdoor ~children ~round
tent : object : fabric outdoor ~big ~forest ~mountain
washing machine : object : electric indoor heavy white metal ~big loud
vacuum cleaner : object : electric indoor loud plastic
light bulb, lightbulb : object : electric glass small indoor ~round ~hot
Paris : place : city capital europe old ~water
London : place : city capital europe old ~water island
Rome : place : city capital europe old ~hot
Tokyo : place : city capital asia water
New York : place : city americas water ~island
Cairo : place : city capital africa hot old ~water
Sydney : place : city australia water ~hot
Rio de Janeiro, Rio : place : city americas water hot mountain
Moscow : place : city capital europe cold ~asia
Venice : place : city europe water island old
Japan : place : country asia island water mountain
Brazil : place : country americas hot water forest
Canada : place : country americas cold water forest
Iceland : place : country europe island water cold
Egypt : place : country africa hot old ~water
India : place : country asia hot ~water old
Italy : place : country europe water old ~hot
Mount Everest, Everest : place : landmark mountain asia cold
Sahara, Sahara Desert : place : landmark africa hot
Amazon rainforest, Amazon : place : landmark americas hot forest ~water green
Grand Canyon : place : landmark americas ~hot ~old
Niagara Falls : place : landmark americas water loud
Great Barrier Reef : place : landmark australia water hot
Antarctica : place : landmark cold water white
Eiffel Tower : place : landmark man_made europe metal ~old
Great Wall of China, Great Wall : place : landmark man_made asia old mountain
Pyramids of Giza, pyramids : place : landmark man_made africa old hot
Statue of Liberty : place : landmark man_made americas metal green water
Hawaii : place : island americas water hot mountain
Alps : place : landmark mountain europe cold
Nile : place : landmark water africa hot old
hospital : place : building man_made medical indoor -outdoor
library : place : building man_made indoor -outdoor office old
airport : place : building man_made loud ~outdoor
beach : place : water hot ~island ~sport ~children
museum : place : building man_made indoor -outdoor old creative
supermarket : place : building man_made indoor -outdoor ~electric
zoo : place : man_made children ~loud
park : place : man_made green children
stadium : place : building man_made sport loud
cinema, movie theater : place : building man_made indoor -outdoor screen night
doctor : person : medical university ~uniform
nurse : person : medical uniform
teacher : person : office ~university children
firefighter : person : uniform dangerous outdoor ~hot drives ~indoor
police officer, policeman, policewoman : person : uniform outdoor ~dangerous drives ~night
chef : person : kitchen ~hot ~uniform creative
pilot : person : fly uniform ~passengers drives
farmer : person : farm outdoor drives -indoor
astronaut : person : fly uniform university dangerous
painter : person : creative ~outdoor
musician : person : music creative loud ~night ~university
singer : person : music creative loud ~night
dancer : person : ~music creative sport
actor, actress : person : creative ~night ~loud
writer, author : person : creative office ~university
lawyer : person : office university
engineer : person : university ~office
scientist : person : university ~medical
mechanic : person : ~uniform drives ~loud
dentist : person : medical university
veterinarian, vet : person : medical university ~farm
baker : person : kitchen ~hot night
fisherman, fisher : person : water outdoor -indoor ~drives ~night
soldier : person : uniform dangerous outdoor
taxi driver : person : drives passengers outdoor
lifeguard : person : water outdoor sport -indoor
judge : person : university office old
librarian : person : office ~old
plumber : person : water ~drives
athlete : person : sport outdoor
waiter, waitress : person : ~uniform ~kitchen ~night
photographer : person : creative ~outdoor ~electric
car, cars : vehicle : wheels engine big heavy metal ~electric drives
bicycle, bike : vehicle : wheels metal sport
motorcycle, motorbike : vehicle : wheels engine loud metal ~dangerous drives
bus : vehicle : wheels engine big heavy public ~loud drives
train : vehicle : rails engine big heavy public loud ~electric metal
airplane, plane, aeroplane : vehicle : fly engine big heavy metal loud ~wheels
helicopter : vehicle : fly engine big heavy loud metal
sailboat, sailing boat : vehicle : water ~wood ~fabric wind
ship : vehicle : water engine big heavy metal
submarine : vehicle : water engine big heavy metal gray
tractor : vehicle : wheels engine farm big heavy loud drives
truck, lorry : vehicle : wheels engine big heavy loud metal drives -passengers ~passengers
skateboard : vehicle : wheels sport wood children
rocket : vehicle : fly engine big heavy loud metal dangerous
tram, streetcar : vehicle : rails electric public big heavy metal
scooter : vehicle : wheels ~electric ~engine children
guitar : instrument : strings wood ~electric
violin : instrument : strings wood ~small brown
piano : instrument : keys ~strings ~percussion big heavy wood black white indoor
drum, drums : instrument : percussion loud round
flute : instrument : wind ~metal ~wood small
trumpet : instrument : wind metal loud yellow
saxophone, sax : instrument : wind metal loud yellow keys
harp : instrument : strings wood big old
cello : instrument : strings wood ~big brown
accordion : instrument : keys wind loud
harmonica : instrument : wind small metal
xylophone : instrument : percussion wood ~metal children
tambourine : instrument : percussion round ~small
bagpipes : instrument : wind loud europe fabric
"""


@dataclass(frozen=True)
class Attribute:
    """A yes/no/maybe property: how to ask about it, how the user answers, how to recognise it."""

    name: str
    question: str
    yes: str
    no: str
    pattern: re.Pattern[str]

    def statement(self, value: str) -> str:
        """The user's answer for ``value`` (yes, no or maybe)."""
        if value == YES:
            return f"Yes. {self.yes}"
        if value == NO:
            return f"No. {self.no}"
        return f"Sometimes, or partly. ({self.yes[:-1]} in some cases.)"

    @property
    def keywords(self) -> tuple[str, ...]:
        """Plain words of the question (what a matching user compares)."""
        return tuple(w for w in re.findall(r"[a-z]+", self.question.lower()) if len(w) > 2)


@dataclass(frozen=True)
class Entity:
    """One thing the user may think of: its names and its value for every attribute."""

    name: str
    aliases: tuple[str, ...]
    category: str
    values: dict[str, str]


def _parse_attributes(text: str) -> dict[str, Attribute]:
    attrs: dict[str, Attribute] = {}
    for lineno, line in enumerate(text.strip().splitlines(), start=1):
        parts = [p.strip() for p in line.split("|", 4)]  # patterns may use | themselves
        if len(parts) != 5:
            raise ValueError(
                f"telepathy_kb ATTRIBUTES line {lineno}: expected 5 '|' fields, got {len(parts)}: {line!r}"
            )
        name, question, yes, no, pats = parts
        if name in attrs:
            raise ValueError(f"telepathy_kb ATTRIBUTES line {lineno}: duplicate attribute {name!r}")
        alts = sorted((p.strip() for p in pats.split(";") if p.strip()), key=len, reverse=True)
        # One pattern per attribute; longer alternatives first so that the longest phrase wins.
        pattern = re.compile(r"\b(?:" + "|".join(f"(?:{a})" for a in alts) + r")\b", re.IGNORECASE)
        attrs[name] = Attribute(name, question, yes, no, pattern)
    return attrs


def _parse_entities(text: str, attrs: dict[str, Attribute]) -> list[Entity]:
    entities: list[Entity] = []
    for lineno, line in enumerate(text.strip().splitlines(), start=1):
        parts = [p.strip() for p in line.split(" : ")]
        if len(parts) != 3:
            raise ValueError(f"telepathy_kb ENTITIES line {lineno}: expected 'names : category : tags': {line!r}")
        names, category, tags = parts
        if category not in CATEGORY_TAGS:
            raise ValueError(
                f"telepathy_kb ENTITIES line {lineno}: unknown category {category!r}; "
                f"allowed: {', '.join(CATEGORY_TAGS)}"
            )
        values = {a: NO for a in attrs}
        for tag in (CATEGORY_TAGS[category] + " " + tags).split():
            value, name = (MAYBE, tag[1:]) if tag[0] == "~" else (NO, tag[1:]) if tag[0] == "-" else (YES, tag)
            if name not in attrs:
                raise ValueError(f"telepathy_kb ENTITIES line {lineno}: unknown attribute {name!r} in {line!r}")
            values[name] = value
        all_names = [n.strip() for n in names.split(",")]
        entities.append(Entity(all_names[0], tuple(all_names[1:]), category, values))
    return entities


_IRREGULAR = {
    "knives": "knife",
    "wolves": "wolf",
    "leaves": "leaf",
    "mice": "mouse",
    "geese": "goose",
    "teeth": "tooth",
    "feet": "foot",
    "people": "person",
    "children": "child",
    "octopi": "octopus",
    "cacti": "cactus",
    "loaves": "loaf",
    "shelves": "shelf",
}
_ARTICLES = {"a", "an", "the"}


def singular(word: str) -> str:
    """A crude singular form, applied the same way to names and guesses.

    >>> [singular(w) for w in ("strawberries", "tomatoes", "buses", "cactus", "glass", "dogs", "wolves")]
    ['strawberry', 'tomato', 'bus', 'cactus', 'glass', 'dog', 'wolf']
    """
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) <= 3 or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("ses", "xes", "ches", "shes", "oes")):
        return word[:-2]
    if word.endswith("s"):
        return word[:-1]
    return word


def normalise(text: str) -> tuple[str, ...]:
    """Lower-case words without punctuation or articles, each made singular."""
    words = re.findall(r"[a-z0-9]+", text.lower().replace("'s ", " "))
    return tuple(singular(w) for w in words if w not in _ARTICLES)


def _plurals(words: tuple[str, ...]) -> set[tuple[str, ...]]:
    """A name as written and with its last word made plural (how questions mention it)."""
    *head, last = words
    forms = {last, last + "s", last + "es"}
    if last.endswith("y"):
        forms.add(last[:-1] + "ies")
    return {(*head, f) for f in forms}


_WORD_RE = re.compile(r"[a-z0-9]+")
MAX_NAME_WORDS = 4  # longest entity name or alias, in words (load_kb checks it)


@dataclass(frozen=True)
class KnowledgeBase:
    """The parsed tables plus the lookup structures the gym needs.

    by_name: normalised name or alias (see :func:`normalise`) -> entity, for answers.
    by_form: a name or alias as written, or with a plural last word -> entity, for questions (no
        singularising there, so that ``glass`` in a question is not the entity ``glasses``).
    """

    attributes: dict[str, Attribute]
    entities: tuple[Entity, ...]
    by_name: dict[tuple[str, ...], Entity]
    by_form: dict[tuple[str, ...], Entity]
    _memo: dict[str, list[Attribute]] = field(default_factory=dict, compare=False, repr=False)

    def entity(self, name: str) -> Entity:
        """The entity called ``name`` (any alias); KeyError names it when unknown."""
        try:
            return self.by_name[normalise(name)]
        except KeyError:
            raise KeyError(f"telepathy: unknown entity {name!r}") from None

    @staticmethod
    def _longest_matches(words: list[str], table: dict[tuple[str, ...], Entity]) -> list[tuple[Entity, int, int]]:
        """Non-overlapping (entity, first word, end word) matches, longest first from the left."""
        longest = MAX_NAME_WORDS
        found, i = [], 0
        while i < len(words):
            for n in range(min(longest, len(words) - i), 0, -1):
                ent = table.get(tuple(words[i : i + n]))
                if ent is not None:
                    found.append((ent, i, i + n))
                    i += n
                    break
            else:
                i += 1
        return found

    def entities_in_answer(self, text: str) -> list[Entity]:
        """Distinct entities an answer names (normalised: case, articles, plurals)."""
        out: list[Entity] = []
        for ent, _, _ in self._longest_matches(list(normalise(text)), self.by_name):
            if ent not in out:
                out.append(ent)
        return out

    def entities_in_question(self, text: str) -> tuple[list[Entity], str]:
        """Entities a question names, and the lower-cased question with their names blanked out."""
        low = text.lower()
        toks = [(m.group(), m.start(), m.end()) for m in _WORD_RE.finditer(low)]
        found = self._longest_matches([t[0] for t in toks], self.by_form)
        chars = list(low)
        for _, i, j in found:
            for k in range(toks[i][1], toks[j - 1][2]):
                chars[k] = " "
        return [f[0] for f in found], "".join(chars)

    def attributes_in(self, question: str) -> list[Attribute]:
        """Attributes a question asks about, in order of appearance.

        Entity names are blanked first (``sea turtle`` must not ask about water); overlapping
        matches keep the longest (``eats meat`` is ``carnivore``, not ``meat``).
        """
        cached = self._memo.get(question)
        if cached is not None:
            return list(cached)
        _, text = self.entities_in_question(question)
        spans: list[tuple[int, int, Attribute]] = []
        for attr in self.attributes.values():
            for m in attr.pattern.finditer(text):
                spans.append((m.start(), m.end(), attr))
        kept: list[tuple[int, int, Attribute]] = []
        for s, e, attr in sorted(spans, key=lambda sp: (-(sp[1] - sp[0]), sp[0])):
            if all(e <= ks or s >= ke for ks, ke, _ in kept):
                kept.append((s, e, attr))
        out: list[Attribute] = []
        for _, _, attr in sorted(kept, key=lambda sp: sp[0]):
            if attr not in out:
                out.append(attr)
        if len(self._memo) > 4096:  # questions repeat within and across episodes; bound the memo
            self._memo.clear()
        self._memo[question] = out
        return list(out)


@lru_cache(maxsize=1)
def load_kb() -> KnowledgeBase:
    """The knowledge base (parsed once)."""
    attrs = _parse_attributes(ATTRIBUTES)
    entities = _parse_entities(ENTITIES, attrs)
    by_name: dict[tuple[str, ...], Entity] = {}
    by_form: dict[tuple[str, ...], Entity] = {}
    for ent in entities:
        for n in (ent.name, *ent.aliases):
            key = normalise(n)
            if key in by_name and by_name[key] is not ent:
                raise ValueError(f"telepathy_kb: name {n!r} is used by {by_name[key].name!r} and {ent.name!r}")
            if len(key) > MAX_NAME_WORDS:
                raise ValueError(f"telepathy_kb: name {n!r} has more than {MAX_NAME_WORDS} words")
            by_name[key] = ent
            for form in _plurals(tuple(_WORD_RE.findall(n.lower()))):
                by_form.setdefault(form, ent)
    return KnowledgeBase(attrs, tuple(entities), by_name, by_form)
